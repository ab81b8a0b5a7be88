"""A compile's model and artifact bytes move out of its row into `compile_blobs`: SQLite rewrites a whole row on
every UPDATE, so each progress step, status change or use of a compile rewrote its model (a 64 MB model: ~40 MB
written and ~1 s per update, measured) and, once done, its artifact too.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "compile_blobs",
        sa.Column("compile_id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),  # model | artifact
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    # (a model emptied when its compile failed for good has no bytes left to keep)
    op.execute("INSERT INTO compile_blobs (compile_id, kind, data)"
               " SELECT id, 'model', model FROM compiles WHERE length(model) > 0")
    op.execute("INSERT INTO compile_blobs (compile_id, kind, data)"
               " SELECT id, 'artifact', artifact FROM compiles WHERE artifact IS NOT NULL")
    with op.batch_alter_table("compiles") as batch:
        batch.add_column(sa.Column("artifact_bytes", sa.BigInteger, nullable=True))
    op.execute("UPDATE compiles SET artifact_bytes = length(artifact) WHERE artifact IS NOT NULL")
    with op.batch_alter_table("compiles") as batch:
        batch.drop_column("artifact")
        batch.drop_column("model")


def downgrade() -> None:
    with op.batch_alter_table("compiles") as batch:
        batch.add_column(sa.Column("model", sa.LargeBinary, nullable=True))
        batch.add_column(sa.Column("artifact", sa.LargeBinary, nullable=True))
    op.execute(sa.text(
        "UPDATE compiles SET model = coalesce((SELECT data FROM compile_blobs b WHERE b.compile_id = compiles.id"
        " AND b.kind = 'model'), :empty), artifact = (SELECT data FROM compile_blobs b"
        " WHERE b.compile_id = compiles.id AND b.kind = 'artifact')").bindparams(
            sa.bindparam("empty", b"", type_=sa.LargeBinary)))
    with op.batch_alter_table("compiles") as batch:
        batch.alter_column("model", existing_type=sa.LargeBinary, nullable=False)
        batch.drop_column("artifact_bytes")
    op.drop_table("compile_blobs")
