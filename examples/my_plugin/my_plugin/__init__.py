"""An example fl_patch plugin (docs/writing-a-plugin.md walks through it): one of each pattern."""
