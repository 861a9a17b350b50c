"""A deliberately broken plugin: one module per way a plugin can fail."""
