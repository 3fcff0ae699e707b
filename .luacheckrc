-- luacheck (Debian's lua-check) for lua/, run by `.venv/bin/python -m tests.lua_lint` over the
-- scripts as Redis runs them: one function library (coordinator/state/scripts.py).
std = "lua51" -- Redis's Lua
-- What Redis gives a script besides the standard library.
read_globals = {"redis", "cjson", "cmsgpack", "bit", "struct"}
-- A library function's two parameters (coordinator/state/scripts.py, _function): a script that
-- takes no keys, or no arguments, leaves one unused.
ignore = {"212/KEYS", "212/ARGV"}
max_line_length = 120 -- as ruff's
