"""One module per benchmark (or per family of splits); each registers its definitions on import."""
