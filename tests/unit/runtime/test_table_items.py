"""A Table LIST's rows as objects: each row's metadata, with its cells by column name."""

from computedomain.runtime.client import table_items


def test_rows_become_their_objects_with_cells_by_column_name() -> None:
    table = {
        "kind": "Table",
        "metadata": {"resourceVersion": "7", "continue": "next"},
        "columnDefinitions": [{"name": "Name"}, {"name": "Status"}, {"name": "Age"}],
        "rows": [
            {
                "cells": ["n1", "Ready,SchedulingDisabled", "5m"],
                "object": {"kind": "PartialObjectMetadata", "metadata": {"name": "n1"}},
            },
            {"cells": ["n2", "NotReady"], "object": {"metadata": {"name": "n2"}}},
        ],
    }
    assert table_items(table) == [
        {
            "kind": "PartialObjectMetadata",
            "metadata": {"name": "n1"},
            "columns": {"Name": "n1", "Status": "Ready,SchedulingDisabled", "Age": "5m"},
        },
        {"metadata": {"name": "n2"}, "columns": {"Name": "n2", "Status": "NotReady"}},
    ]
    assert "rows" not in table  # the decoded rows are not kept twice
