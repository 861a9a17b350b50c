"""The patching core: registrations, target paths, resolving, applying and reverting, name bindings.

Imported by everything else; imports nothing of fl_patch outside ``core`` at module level
(``activation.settings`` only for the type of the settings it is given).
"""
