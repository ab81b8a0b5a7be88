"""Property-based requests generated from the OpenAPI document: no 5xx, ever (bounded run).

Driven through schemathesis' Python API (strategies per operation) rather than its pytest plugin, so
the test does not depend on pytest internals.
"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from service_procs import start_api

EXAMPLES = 12


def test_no_server_errors(tmp_path: Path) -> None:
    api = start_api(tmp_path, wait_limit_s="2", max_time_limit_s="5")
    failures: list[str] = []
    calls = 0
    try:
        schema = schemathesis.openapi.from_url(api.url + "/openapi.json")
        operations = [r.ok() for r in schema.get_all_operations()]
        assert len(operations) >= 12

        for op in operations:
            @given(case=op.as_strategy())
            @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            def check(case: schemathesis.Case) -> None:
                nonlocal calls
                calls += 1
                response = case.call(timeout=30)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                    f"{response.text[:300]}")
                elif response.status_code >= 400 and "json" in response.headers.get("content-type", ""):
                    detail = response.json()["detail"]
                    if not (isinstance(detail, list) and all({"loc", "msg", "type"} <= set(d) for d in detail)):
                        failures.append(f"{case.method} {case.formatted_path}: error body {response.text[:300]}")

            check()
    finally:
        api.stop()
    print(f"schemathesis: {calls} calls over {len(operations)} operations")
    assert calls >= len(operations) * 3
    assert not failures, "\n".join(failures[:20])
    assert "event=unhandled_error" not in api.output(), api.output()[-4000:]
