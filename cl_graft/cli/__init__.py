"""cl-graft command line."""
