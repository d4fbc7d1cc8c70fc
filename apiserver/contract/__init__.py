"""The API's contract, pure: the error tree and its ``Status`` form, schemas,
validation, OpenAPI documents, tables, selectors, paging tokens, patches and
DeleteOptions. No I/O and no HTTP framework: every other part of the
frontend uses it, it uses none of them."""
