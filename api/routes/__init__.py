"""The API's own routes (the 000 contract, docs/api.md): one module-level `APIRouter` per
resource, included by api/main.py. May import api's services, deps and errors, engine
and workflows; never api.contracts, whose routes sit above these."""
