"""Tether host agent: claims work from the coordinator and runs it on local devices."""
