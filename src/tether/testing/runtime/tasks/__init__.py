"""Tasks: creating, appending, reading and listing them, their values, upcasting, refusals and tenants,
where a task stands."""
