-- A view's page (GET /v1/views/{name}, /ui/views/{name}): the first $limit rows the view yields at the pin, in
-- the order its `-- order:` comment declares (views/__init__.py view_order; none: as DuckDB gives them), each with
-- `_total`, how many rows it yields in all. The reader puts the view's quoted name (lake.query.ident, a name of
-- views/*.sql only) and its order in place of the two markers below.
SELECT *, count(*) OVER () AS _total
FROM /* view */ NULL
/* order */
LIMIT $limit
