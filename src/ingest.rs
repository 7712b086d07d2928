//! The ingest socket (being written).
