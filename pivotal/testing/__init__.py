"""Support for the project's tests and benchmarks: small environments that expose one behaviour
each, the world-counting environments (journal, ledger), a loopback provider server and helpers
that start real servers. Shipped with the package so benchmarks import it like any module, and
so an application can reuse the side-effect ledgers to test its own wiring.

Importing a module here registers its environments; nothing in the rest of Pivotal imports it.
"""
