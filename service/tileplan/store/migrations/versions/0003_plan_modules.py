"""Generated modules of plans (POST /schedule with codegen, GET /plans/{key}/module).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "modules",
        sa.Column("key", sa.String(64), primary_key=True),  # the plan's key
        sa.Column("status", sa.String(16), nullable=False),  # ok | error
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("tvmscript", sa.Text, nullable=True),
        sa.Column("c_source", sa.Text, nullable=True),
        sa.Column("tar", sa.LargeBinary, nullable=True),
        sa.Column("notes", sa.Text, nullable=False),
        sa.Column("model_cycles", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("build_seconds", sa.Float, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("modules")
