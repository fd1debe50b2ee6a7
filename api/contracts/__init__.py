"""The earlier designs' own routes (001, 003, 004; docs/contracts.md), one router module
per design over the core services, and `mounting`, which serves them. May import
api (its services, deps and routes' shared types), engine and workflows."""
