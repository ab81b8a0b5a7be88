"""Code generation targets: one module per accelerator family."""
