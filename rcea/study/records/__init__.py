"""Records in and out of the store: ingest of interchange files, importers' store side,
export."""
