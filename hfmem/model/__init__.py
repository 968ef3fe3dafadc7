"""A model's architecture and exact parameter inventory: config summary and guard, meta build, fallback inventories,
cross-check."""
