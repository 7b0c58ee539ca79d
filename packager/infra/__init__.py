"""Infrastructure every stage may use: hashing, positional I/O, bounded file reading, versions."""
