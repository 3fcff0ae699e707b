"""HTTP: the route table, the handlers that only translate HTTP, who is calling, reading bodies,
response shapes, the one error boundary and the OpenAPI document."""
