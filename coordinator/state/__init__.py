"""The protocol's state in Redis: one store method per Lua script, the key names, typed records,
the bounded reads and why a queued task waits. Imports no HTTP."""
