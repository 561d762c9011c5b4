"""One APIRouter per resource; `app.py` mounts them all."""
