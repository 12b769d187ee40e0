"""rollcheck pytest plugin: options, markers, fixtures and report hooks."""
