"""The plan cache and job records (SQLAlchemy 2 + Alembic): SQLite by default, PostgreSQL by URL."""

from tileplan.store.repository import CachedPlan, Job, Store, open_store

__all__ = ["CachedPlan", "Job", "Store", "open_store"]
