"""Running the process: uvicorn with request-head limits and a graceful stop, gunicorn workers,
logging, and the checks ``serve`` makes first."""
