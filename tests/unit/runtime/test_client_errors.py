from computedomain.runtime.client import PATCH_CONTENT_TYPES, ApiError, parse_retry_after


def _status(code: int, reason: str, message: str = "m") -> dict[str, object]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "code": code,
        "reason": reason,
        "message": message,
    }


def test_conflict_and_already_exists_are_told_apart() -> None:
    conflict = ApiError.from_status(409, _status(409, "Conflict"))
    exists = ApiError.from_status(409, _status(409, "AlreadyExists"))
    assert conflict.is_conflict
    assert not conflict.is_already_exists
    assert exists.is_already_exists
    assert not exists.is_conflict


def test_status_code_in_body_wins_over_http_status() -> None:
    expired = ApiError.from_status(200, _status(410, "Expired", "too old resource version"))
    assert expired.status == 410
    assert expired.is_gone
    assert expired.message == "too old resource version"


def test_non_status_body_keeps_http_status() -> None:
    error = ApiError.from_status(503, None)
    assert error.status == 503
    assert error.reason == ""
    assert error.body is None


def test_predicates() -> None:
    assert ApiError.from_status(404, _status(404, "NotFound")).is_not_found
    assert ApiError.from_status(422, _status(422, "Invalid")).is_invalid
    assert ApiError.from_status(403, _status(403, "Forbidden")).is_forbidden
    throttled = ApiError.from_status(429, _status(429, "TooManyRequests"), retry_after=3)
    assert throttled.is_too_many_requests
    assert throttled.retry_after == 3


def test_retry_after_parsing() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None


def test_patch_content_types_are_explicit() -> None:
    assert PATCH_CONTENT_TYPES["merge"] == "application/merge-patch+json"
    assert PATCH_CONTENT_TYPES["json"] == "application/json-patch+json"
    assert PATCH_CONTENT_TYPES["apply"] == "application/apply-patch+yaml"
