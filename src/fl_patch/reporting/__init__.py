"""What fl_patch tells the user at exit (report mode)."""
