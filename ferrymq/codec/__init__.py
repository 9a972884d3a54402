"""The wire and disk formats every side shares: the CommitLog record layout, the property
encoding, offset message ids and the produce-record format.

The lowest layer: it imports only the standard library and ``crc32c``, never the store,
the node or the SDK, so the store, the node, the SDK and the Spark source all read and
write bytes through one definition of each format (docs/architecture.md, "Layers").
"""
