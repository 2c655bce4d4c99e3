"""The documents the codec benchmarks encode and decode: a deterministic, nested record list."""

RECORDS = [{"id": i, "name": f"item-{i}", "tags": ["a", "b", str(i % 7)], "price": i * 0.25,
            "stock": {"warehouse": i % 3, "count": i * 11 % 97}} for i in range(400)]
