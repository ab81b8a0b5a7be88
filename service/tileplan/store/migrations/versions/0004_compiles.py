"""Whole-model compiles (POST /compile): the request, progress, summary and the artifact's bytes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "compiles",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False),  # digest of model, hardware, options, solver
        sa.Column("status", sa.String(16), nullable=False),  # queued | running | done | failed
        sa.Column("model_name", sa.String(200), nullable=False),
        sa.Column("model_sha256", sa.String(64), nullable=False),
        sa.Column("hardware", sa.String(200), nullable=False),
        sa.Column("request", sa.Text, nullable=False),  # JSON: descriptor, options, input_shapes
        sa.Column("model", sa.LargeBinary, nullable=False),  # the ONNX bytes (a restarted server resumes)
        sa.Column("ops_done", sa.Integer, nullable=False),
        sa.Column("ops_total", sa.Integer, nullable=False),
        sa.Column("summary", sa.Text, nullable=True),  # JSON network summary, once done
        sa.Column("artifact", sa.LargeBinary, nullable=True),  # the tar, once done
        sa.Column("artifact_sha256", sa.String(64), nullable=True),
        sa.Column("error", sa.Text, nullable=True),  # JSON {loc, msg, type}, once failed
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deadline", sa.Float, nullable=False),  # epoch seconds
    )
    op.create_index("ix_compiles_id", "compiles", ["id"], unique=True)
    op.create_index("ix_compiles_status", "compiles", ["status"])
    op.create_index("ix_compiles_hardware", "compiles", ["hardware"])


def downgrade() -> None:
    op.drop_table("compiles")
