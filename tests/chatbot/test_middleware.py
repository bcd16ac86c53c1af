"""The admin shows times in the viewer's time zone (reported by the browser in a cookie), and names it."""

from __future__ import annotations

import pytest
from django.test import Client

from chatbot.middleware import TIME_ZONE_COOKIE

pytestmark = pytest.mark.django_db


def test_the_admin_names_the_viewers_zone_and_uses_it(admin_client: Client) -> None:
    admin_client.cookies[TIME_ZONE_COOKIE] = "America/New_York"
    page = admin_client.get("/admin/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Times in America/New_York" in page
    # Django's own widgets compare this offset with the browser's: they now agree.
    assert 'data-admin-utc-offset="-18000"' in page or 'data-admin-utc-offset="-14400"' in page


@pytest.mark.parametrize("cookie", ["", "Mars/Olympus_Mons", "../../etc/passwd", "x" * 100])
def test_without_a_usable_zone_the_servers_is_used_and_named(admin_client: Client, settings, cookie: str) -> None:
    admin_client.cookies[TIME_ZONE_COOKIE] = cookie
    page = admin_client.get("/admin/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert f"Times in {settings.TIME_ZONE}" in page


def test_the_zone_does_not_leak_into_the_next_request(admin_client: Client, settings) -> None:
    admin_client.cookies[TIME_ZONE_COOKIE] = "Europe/Paris"
    admin_client.get("/admin/")
    del admin_client.cookies[TIME_ZONE_COOKIE]
    assert f"Times in {settings.TIME_ZONE}" in admin_client.get("/admin/", HTTP_ACCEPT_LANGUAGE="en").content.decode()


def test_the_admin_speaks_the_browsers_language(admin_client: Client) -> None:
    english = admin_client.get("/admin/", HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.9").content.decode()
    chinese = admin_client.get("/admin/", HTTP_ACCEPT_LANGUAGE="zh-TW,zh;q=0.9").content.decode()
    assert "Site administration" in english and '<html lang="en"' in english
    assert "網站管理" in chinese and '<html lang="zh-hant"' in chinese
    # Our own words follow, from locale/zh_Hant (compiled and committed).
    assert "Documents and index jobs" in english and "文件與索引工作" in chinese
    assert "Documents and index jobs" not in chinese
