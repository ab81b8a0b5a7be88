"""Tileplan code generation: plans -> TVM schedules -> C calling an accelerator's API, plus emulators."""
