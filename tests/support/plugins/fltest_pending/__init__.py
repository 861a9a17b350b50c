"""An impl module that imports one of its own targets\x27 modules at its top."""
