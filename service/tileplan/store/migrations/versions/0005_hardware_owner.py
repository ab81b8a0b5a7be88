"""Registered hardware carries who registered it (a token fingerprint) and a version that counts replacements.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hardware") as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))  # None: registered without tokens
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hardware") as batch:
        batch.drop_column("updated_at")
        batch.drop_column("version")
        batch.drop_column("owner")
