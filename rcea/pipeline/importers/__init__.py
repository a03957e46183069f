"""Importers: pure readers that turn a trainer's or a lab's files into interchange records
(``rcea.pipeline.records.RecordBatch``), validated exactly like ``rcea ingest`` input, with
errors naming the source file, line/row and the source column. Storing them is the
caller's business (``rcea.study.records.imports`` hands them to the one transactional ingest)."""
