"""Who the frontend takes a caller to be, as k8s.io/apiserver decides it."""

from __future__ import annotations

import pytest

from apiserver.access.authn import RequestHeaders, UserInfo


@pytest.mark.parametrize(("user", "groups"), [
    # the aggregator fetching /openapi/v2 names no group at all
    (UserInfo("system:aggregator"), ("system:authenticated",)),
    (UserInfo("alice", ("team-a",)), ("team-a", "system:authenticated")),
    # a service account from a TokenReview already has it: not added twice
    (UserInfo("system:serviceaccount:kyverno:kyverno-reports-controller",
              ("system:serviceaccounts", "system:serviceaccounts:kyverno",
               "system:authenticated")),
     ("system:serviceaccounts", "system:serviceaccounts:kyverno", "system:authenticated")),
    (UserInfo("system:anonymous", ("system:unauthenticated",)), ("system:unauthenticated",)),
    (UserInfo("system:anonymous"), ()),
    (UserInfo("someone", ("system:unauthenticated",)), ("system:unauthenticated",)),
])
def test_every_authenticated_user_is_in_system_authenticated(
        user: UserInfo, groups: tuple[str, ...]) -> None:
    assert user.authenticated().groups == groups


def test_request_headers_name_user_groups_extra_and_uid() -> None:
    headers = RequestHeaders(uid_headers=("X-Remote-Uid",))
    user = headers.user([(b"x-remote-user", b"alice"), (b"x-remote-group", b"a"),
                         (b"x-remote-group", b"b"), (b"x-remote-uid", b"1234"),
                         (b"x-remote-extra-scopes%2fx", b"s")])
    assert user == UserInfo("alice", ("a", "b"), (("scopes/x", ("s",)),), "1234")
    # no uid headers configured (k8s.io/apiserver's default): no uid
    plain = RequestHeaders().user([(b"x-remote-user", b"alice"), (b"x-remote-uid", b"1")])
    assert plain is not None and plain.uid == ""
