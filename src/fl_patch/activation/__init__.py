"""Activation: start-up, the bootstrap directory, the launcher, interpreter options, children, settings,
sources of registrations, the run-time state and strict mode."""
