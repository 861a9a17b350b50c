"""--check, --list and drift: reading registrations against the installed megatron."""
