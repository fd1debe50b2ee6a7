"""The REST API process: FastAPI routes (`routes/`, and the earlier designs' in
`contracts/`) over services that call Temporal (`*_service.py`, readers, the agent bridge).
May import engine and workflows; never activities or worker (tests/test_layering.py)."""
