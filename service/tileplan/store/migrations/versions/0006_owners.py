"""Owners, quotas and retention: who holds each compile, what a compile stores and when it was last used, whose
each /schedule job is.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the owners that asked for a compile (the same request from two owners is one compile, held by both); a
    # compile goes when its last owner deletes it, or by retention
    op.create_table(
        "compile_owners",
        sa.Column("compile_id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(64), primary_key=True),  # token fingerprint, or "addr:<client address>"
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_compile_owners_owner", "compile_owners", ["owner"])
    with op.batch_alter_table("compiles") as batch:
        batch.add_column(sa.Column("stored_bytes", sa.BigInteger, nullable=False, server_default="0"))
        batch.add_column(sa.Column("used_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))  # who asked first: whose share it runs in
    # what the compiles stored so far hold (byte lengths of the blobs; the JSON texts are ASCII)
    op.execute(
        "UPDATE compiles SET used_at = updated_at, stored_bytes = length(model) + length(request)"
        " + coalesce(length(artifact), 0) + coalesce(length(summary), 0)"
    )
    op.create_index("ix_compiles_used_at", "compiles", ["used_at"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_finished_at", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("owner")
    op.drop_index("ix_compiles_used_at", "compiles")
    with op.batch_alter_table("compiles") as batch:
        batch.drop_column("owner")
        batch.drop_column("used_at")
        batch.drop_column("stored_bytes")
    op.drop_table("compile_owners")
