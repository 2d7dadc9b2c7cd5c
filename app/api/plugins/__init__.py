"""The plugins API's state (docs/plugins.md): the plugin types (`plugins_registry`, their wire
models `plugin_schemas`), where the configuration binds them (`plugin_bindings`), previews of
what a plugin would do to a sample request (`plugin_previews`, `rag_probe`) and the
`context_compression` plugin's own capabilities, health, preview and stats (`compression`).
No HTTP here: the routes are app/api/routes/plugins.py and compression.py."""
