"""The management API's HTTP layer: one router module per resource family. Each handler
parses the request, calls `Management` (app/management/service.py) and renders the answer."""
