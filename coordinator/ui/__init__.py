"""The dashboard's static files, served at /ui (a package so a non-editable install ships them)."""
