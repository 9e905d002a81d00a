"""What a catalog service may vend: credentials, not places (deny by default).

A catalog service's DescribeTable answers with storage options, and Lance lays them over the
operator's ``storage.*`` (a vended option wins). A service that vends ``aws_endpoint`` (another
host) and ``allow_http=true`` would have every read sign the operator's key id over plain HTTP
to that host. So a vended option is passed on only when it is a credential -- a key id, a
secret, a session token or bearer token, an account key or SAS token, and their expiry
(``expires_at_millis``) -- named by one of the aliases Lance and object_store accept, in any
letter case (Lance lower-cases keys before parsing them). Every other vended key (an endpoint,
region, ``allow_http``, proxy, virtual-hosted style, signing and payload settings, a bucket,
container or account name, a credential *source* such as a file path, a role, a metadata
endpoint, a service-account key carrying its own token URL, and any key not known here) is
accepted only when the operator's own storage option of the same meaning has the same value,
so that it changes nothing; otherwise the table is refused (:func:`check`), before Lance opens
anything with it.

The aliases are object_store's (``AmazonS3ConfigKey``, ``GoogleConfigKey``, ``AzureConfigKey``,
``ClientConfigKey``, 0.14) and Lance's own (``expires_at_millis``, ``google_storage_token``,
``use_opendal``, ...). Lance also reads every key that *contains* ``allow_http`` as
``allow_http``; such keys are compared as one meaning.
"""
from __future__ import annotations

from typing import Mapping

from ..errors import CompactionError
from .secrets import SECRET_OPTION, redact

# -- credentials: passed on from a service (exact aliases, lower case) --------------------------
EXPIRY = "expires_at_millis"
CREDENTIALS = frozenset({
    # AWS (object_store AccessKeyId, SecretAccessKey, Token; OpenDAL's names are among them)
    "aws_access_key_id", "access_key_id", "aws_secret_access_key", "secret_access_key",
    "aws_session_token", "aws_token", "session_token", "token",
    # Google Cloud Storage: a bearer token (object_store's, and the one Lance reads itself)
    "google_bearer_token", "bearer_token", "google_storage_token",
    # Azure: the account key, a SAS token, a bearer token
    "azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key", "master_key",
    "account_key", "access_key", "azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token",
    "azure_storage_token",
    # their expiry (Lance asks the service again before it)
    EXPIRY,
})

# -- everything else: accepted only as the operator sets it. Aliases by store, so that an
# operator's `endpoint` and a service's `aws_endpoint_url` are one meaning. --------------------
_AWS = {
    "default_region": ("aws_default_region", "default_region"),
    "region": ("aws_region", "region"),
    "bucket": ("aws_bucket", "aws_bucket_name", "bucket_name", "bucket"),
    "endpoint": ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint"),
    "s3_endpoint": ("aws_endpoint_url_s3",),
    "virtual_hosted_style_request": ("aws_virtual_hosted_style_request", "virtual_hosted_style_request"),
    "s3_express": ("aws_s3_express", "s3_express"),
    "imdsv1_fallback": ("aws_imdsv1_fallback", "imdsv1_fallback"),
    "metadata_endpoint": ("aws_metadata_endpoint", "metadata_endpoint"),
    "unsigned_payload": ("aws_unsigned_payload", "unsigned_payload"),
    "checksum_algorithm": ("aws_checksum_algorithm", "checksum_algorithm"),
    "container_credentials_relative_uri": ("aws_container_credentials_relative_uri",
                                           "container_credentials_relative_uri"),
    "container_credentials_full_uri": ("aws_container_credentials_full_uri", "container_credentials_full_uri"),
    "container_authorization_token_file": ("aws_container_authorization_token_file",
                                           "container_authorization_token_file"),
    "web_identity_token_file": ("aws_web_identity_token_file", "web_identity_token_file"),
    "role_arn": ("aws_role_arn", "role_arn"),
    "role_session_name": ("aws_role_session_name", "role_session_name"),
    "sts_endpoint": ("aws_endpoint_url_sts", "endpoint_url_sts"),
    "skip_signature": ("aws_skip_signature", "skip_signature"),
    "copy_if_not_exists": ("aws_copy_if_not_exists", "copy_if_not_exists"),
    "conditional_put": ("aws_conditional_put", "conditional_put"),
    "disable_tagging": ("aws_disable_tagging", "disable_tagging"),
    "disable_bulk_delete": ("aws_disable_bulk_delete", "disable_bulk_delete"),
    "request_payer": ("aws_request_payer", "request_payer"),
    "server_side_encryption": ("aws_server_side_encryption", "server_side_encryption"),
    "sse_kms_key_id": ("aws_sse_kms_key_id", "sse_kms_key_id"),
    "sse_bucket_key_enabled": ("aws_sse_bucket_key_enabled", "sse_bucket_key_enabled"),
    "sse_customer_key_base64": ("aws_sse_customer_key_base64", "sse_customer_key_base64"),
    "profile": ("aws_profile", "profile"),
}
_GCS = {
    "service_account": ("google_service_account", "service_account", "google_service_account_path",
                        "service_account_path"),
    "service_account_key": ("google_service_account_key", "service_account_key"),
    "bucket": ("google_bucket", "google_bucket_name", "bucket", "bucket_name"),
    "base_url": ("google_base_url", "base_url"),
    "application_credentials": ("google_application_credentials", "application_credentials"),
    "skip_signature": ("google_skip_signature", "skip_signature"),
}
_AZURE = {
    "account_name": ("azure_storage_account_name", "account_name"),
    "client_id": ("azure_storage_client_id", "azure_client_id", "client_id"),
    "client_secret": ("azure_storage_client_secret", "azure_client_secret", "client_secret"),
    "authority_id": ("azure_storage_tenant_id", "azure_storage_authority_id", "azure_tenant_id",
                     "azure_authority_id", "tenant_id", "authority_id"),
    "authority_host": ("azure_storage_authority_host", "azure_authority_host", "authority_host"),
    "use_emulator": ("azure_storage_use_emulator", "use_emulator"),
    "endpoint": ("azure_storage_endpoint", "azure_endpoint", "endpoint"),
    "msi_endpoint": ("azure_msi_endpoint", "azure_identity_endpoint", "identity_endpoint", "msi_endpoint"),
    "object_id": ("azure_object_id", "object_id"),
    "msi_resource_id": ("azure_msi_resource_id", "msi_resource_id"),
    "federated_token_file": ("azure_federated_token_file", "federated_token_file"),
    "use_fabric_endpoint": ("azure_use_fabric_endpoint", "use_fabric_endpoint"),
    "use_azure_cli": ("azure_use_azure_cli", "use_azure_cli"),
    "skip_signature": ("azure_skip_signature", "skip_signature"),
    "container_name": ("azure_container_name", "container_name"),
    "disable_tagging": ("azure_disable_tagging", "disable_tagging"),
    "fabric_token_service_url": ("azure_fabric_token_service_url", "fabric_token_service_url"),
    "fabric_workload_host": ("azure_fabric_workload_host", "fabric_workload_host"),
    "fabric_session_token": ("azure_fabric_session_token", "fabric_session_token"),
    "fabric_cluster_identifier": ("azure_fabric_cluster_identifier", "fabric_cluster_identifier"),
    "credential_type": ("azure_credential_type", "credential_type"),
    "encryption_key": ("azure_storage_encryption_key", "encryption_key"),
}
# object_store's HTTP client settings, read by every store (with its prefix or without).
_CLIENT = frozenset({
    "allow_invalid_certificates", "disable_system_certificates", "connect_timeout", "default_content_type",
    "http1_only", "http2_only", "http2_keep_alive_interval", "http2_keep_alive_timeout",
    "http2_keep_alive_while_idle", "http2_max_frame_size", "pool_idle_timeout", "pool_max_idle_per_host",
    "proxy_url", "proxy_ca_certificate", "proxy_excludes", "randomize_addresses", "read_timeout", "timeout",
    "user_agent"})
_STORES = {"aws": ("aws_", _AWS), "gcs": ("google_", _GCS), "azure": ("azure_", _AZURE)}
_ALIASES = {cloud: {alias: name for name, aliases in table.items() for alias in aliases}
            for cloud, (_, table) in _STORES.items()}
# The store a location's scheme names (as Lance's object-store registry maps them).
_SCHEMES = {"s3": "aws", "s3a": "aws", "s3+ddb": "aws", "gs": "gcs", "gcs": "gcs", "az": "azure",
            "abfs": "azure", "abfss": "azure", "adl": "azure", "azure": "azure"}
# Values compared as booleans (object_store's spellings of true and false).
_TRUE, _FALSE = {"1", "true", "on", "yes", "y"}, {"0", "false", "off", "no", "n"}
_BOOLEAN = {"allow_http", "virtual_hosted_style_request", "s3_express", "imdsv1_fallback", "unsigned_payload",
            "skip_signature", "copy_if_not_exists", "disable_tagging", "disable_bulk_delete", "request_payer",
            "sse_bucket_key_enabled", "use_emulator", "use_fabric_endpoint", "use_azure_cli",
            "allow_invalid_certificates", "disable_system_certificates", "http1_only", "http2_only",
            "http2_keep_alive_while_idle", "randomize_addresses", "use_opendal"}
# Places: their value is named in a refusal (no secret in it).
_SHOWN = {"endpoint", "s3_endpoint", "sts_endpoint", "metadata_endpoint", "base_url", "authority_host",
          "msi_endpoint", "proxy_url", "region", "default_region", "allow_http", "bucket", "account_name",
          "container_name", "virtual_hosted_style_request", "skip_signature", "unsigned_payload", "use_opendal",
          "use_emulator", "s3_express"}


def store_of(location: str | None) -> str | None:
    """The cloud store a table location is on (``aws``, ``gcs``, ``azure``), None for a local
    path or another scheme."""
    if not location or "://" not in location:
        return None
    return _SCHEMES.get(location.split("://", 1)[0].lower())


def is_credential(key: str) -> bool:
    """Whether a vended storage option is a credential or its expiry (passed on as vended)."""
    return key.lower() in CREDENTIALS


def meaning(key: str, store: str | None) -> str:
    """What a (non-credential) storage option sets on ``store``: one name for all its aliases
    (``aws.endpoint`` for ``aws_endpoint``, ``AWS_ENDPOINT_URL``, ``endpoint``, ...), ``allow_http``
    for every key Lance reads as it, else the key itself in lower case (an unknown key means
    only itself)."""
    k = key.lower()
    if "allow_http" in k:
        return "allow_http"
    if k == "use_opendal":
        return "use_opendal"
    if store in _STORES:
        if k in _ALIASES[store]:
            return f"{store}.{_ALIASES[store][k]}"
        prefix = _STORES[store][0]
        bare = k[len(prefix):] if k.startswith(prefix) else k
        if bare in _CLIENT:
            return f"client.{bare}"
    return f"key.{k}"


def _same(what: str, a: str, b: str) -> bool:
    a, b = str(a).strip(), str(b).strip()
    if what.rsplit(".", 1)[-1] in _BOOLEAN:
        la, lb = a.lower(), b.lower()
        if la in _TRUE | _FALSE and lb in _TRUE | _FALSE:
            return (la in _TRUE) == (lb in _TRUE)
    return a == b


def printable(text: str, limit: int = 100) -> str:
    """A service's text (a key, a location) as a message or log line names it: control
    characters escaped, at most ``limit`` characters."""
    out = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(text)[:limit])
    return out + ("..." if len(str(text)) > limit else "")


def _shown(key: str, what: str, value: str) -> str:
    """The vended value as a refusal may name it: a place's (an endpoint, a region), printable
    and short; never a value of a secret-sounding key."""
    value = str(value)
    if (what.rsplit(".", 1)[-1] in _SHOWN and not SECRET_OPTION.search(key) and len(value) <= 200
            and value.isprintable()):
        return f" ('{value}')"
    return ""


def refused(vended: Mapping[str, str] | None, operator: Mapping[str, str] | None,
            location: str | None) -> list[tuple[str, str, str]]:
    """The vended options that would change a place: (key, meaning, why), in key order. Empty
    when every vended option is a credential or equals the operator's option of its meaning."""
    store = store_of(location)
    own: dict[str, list[str]] = {}
    for k, v in (operator or {}).items():
        if not is_credential(k):
            own.setdefault(meaning(k, store), []).append(str(v))
    out = []
    for k in sorted(vended or {}):
        if is_credential(k):
            continue
        what = meaning(k, store)
        theirs = own.get(what)
        if not theirs:
            out.append((k, what, "the operator's catalog does not set it"))
        elif not all(_same(what, vended[k], o) for o in theirs):
            out.append((k, what, "it differs from the operator's setting"))
    return out


def check(vended: Mapping[str, str] | None, operator: Mapping[str, str] | None, location: str | None,
          service: str, table: str) -> None:
    """Raise a :class:`CompactionError` naming the service, the table and the first vended
    option that is not a credential and would change what the operator set (its value only
    when it is a place, never a secret); nothing when every vended option may pass."""
    bad = refused(vended, operator, location)
    if not bad:
        return
    key, what, why = bad[0]
    more = f" (and {', '.join(repr(printable(k)) for k, _, _ in bad[1:6])})" if len(bad) > 1 else ""
    shown = _shown(key, what, vended[key])
    text = (f"{service}: table {table}: the storage option '{printable(key)}'{shown} it vends is refused{more}: "
            f"{why}. A catalog service may vend credentials and their expiry only (access key id, secret, session "
            "or bearer token, account key or SAS token, expires_at_millis); the endpoint, region, allow_http, "
            "proxy, signing and every other storage setting come from the operator's "
            f"spark.sql.catalog.<catalog>.storage.{printable(key.lower())}")
    raise CompactionError(redact(text, {**dict(vended or {}), **dict(operator or {})}), kind="invalid")
