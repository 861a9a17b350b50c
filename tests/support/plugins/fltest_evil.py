"""Importing this module is a security bug: nothing registered it."""

raise AssertionError("fl_patch imported a module that no registration named")
