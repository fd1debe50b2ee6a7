"""The processes that run jobs and wire everything: the native worker, the HTTP agent, the
CLIs (`jobforge`, `runforge-cli`) and the dev stack. May import activities, engine and
workflows; never api (the CLI starts it by name; tests/test_layering.py)."""
