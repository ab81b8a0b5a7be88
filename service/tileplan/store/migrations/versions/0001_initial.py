"""Plans, registered hardware, jobs, job layers and solve claims.

Revision ID: 0001
Revises:
Create Date: 2025-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("hardware", sa.String(200), nullable=False),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("layer_name", sa.String(200), nullable=False),
        sa.Column("mapper", sa.String(32), nullable=False),
        sa.Column("solver_version", sa.String(64), nullable=False),
        sa.Column("cycles", sa.Float, nullable=False),
        sa.Column("energy_pj", sa.Float, nullable=False),
        sa.Column("baseline_cycles", sa.Float, nullable=True),
        sa.Column("solve_seconds", sa.Float, nullable=False),
        sa.Column("layer", sa.Text, nullable=False),
        sa.Column("doc", sa.Text, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
    )
    op.create_index("ix_plans_key", "plans", ["key"], unique=True)
    op.create_index("ix_plans_hardware", "plans", ["hardware"])
    op.create_index("ix_plans_op", "plans", ["op"])

    op.create_table(
        "hardware",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("descriptor", sa.Text, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
    )

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("hardware", sa.String(200), nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("done", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("finished_at", TZ, nullable=True),
        sa.Column("deadline", sa.Float, nullable=False),
    )
    op.create_index("ix_jobs_status", "jobs", ["status"])

    op.create_table(
        "job_layers",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("updated_at", TZ, nullable=False),
        sa.UniqueConstraint("job_id", "key", name="uq_job_layers_job_id_key"),
    )
    op.create_index("ix_job_layers_job_id", "job_layers", ["job_id"])
    op.create_index("ix_job_layers_key", "job_layers", ["key"])

    op.create_table(
        "claims",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("claims", "job_layers", "jobs", "hardware", "plans"):
        op.drop_table(table)
