"""The durable queue in PostgreSQL: schema models, the admission transaction, leadership, NOTIFY.

All SQL of gangq lives in this package, one module per aggregate (`jobs`, `reservations`,
`tenants`, `events`, `usage`, `leader`, `notify`, `runs`, `checkpoints`). Functions take a
session or connection first and return core dataclasses or plain frozen rows; ORM rows never
leave the package. Policy is never decided here: the admission transaction calls the decision
core and records its result.

Migrations live in the repository's `migrations/` folder, the only source of DDL. The package
ships them as package data through the `migrations` link inside this folder, so
`gangq migrate` finds them the same way in a source checkout and in a non-editable install.
"""
