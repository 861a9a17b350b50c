"""What fl_patch does for the host process: GPU-only import stand-ins, gloo exit, children, strict exit."""
