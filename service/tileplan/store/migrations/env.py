"""Alembic environment: run by `tileplan.store.migrate.upgrade`, which passes an open connection."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from tileplan.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine

        url = config.get_main_option("sqlalchemy.url")
        if url is None:
            raise RuntimeError("alembic: no sqlalchemy.url and no connection given")
        engine = create_engine(url)
        with engine.begin() as conn:
            _run(conn)
        engine.dispose()
    else:
        _run(connection)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
