"""Where hubflow keeps documents and moves objects: local folders, any fsspec file system, Azure Blob.

:mod:`.document_store` is the interface of a status folder's store, :mod:`.document_stores` its
local and fsspec stores and :func:`~.document_stores.store_for`, :mod:`.blob_document_store` the
store on Azure Blob, :mod:`.blob_api` blobs by URL with ETags and server-side copies, and
:mod:`.azure` Azure storage URLs and the credentials each client needs. No Spark, no Airflow.
"""
