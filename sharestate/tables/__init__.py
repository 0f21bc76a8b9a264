"""The Delta tables: their documented schemas and the rows the jobs write into them."""
