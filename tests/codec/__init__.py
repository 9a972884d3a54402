"""The wire and disk formats (``ferrymq/codec/``): the CommitLog record, properties,
produce records, and their C loops."""
