"""Airflow 3.3's own UI driven in headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
through Selenium), as a person uses it: log in, start a backfill from a DAG's Trigger dialog,
trigger a DAG from its Params form, read a page.

Waits are bounds for a hang, not for speed: on a loaded 2-core machine the UI's first page takes
seconds. Whatever goes wrong, :func:`browser` keeps a screenshot and the page's HTML in the
artifacts folder and names them in the failure.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

#: How long one step (a page, a dialog, a toast) may take before the test fails as hung.
STEP_TIMEOUT = 120.0
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
#: Set a React-controlled input's value the way a paste does: the native setter, then one input event.
SET_INPUT_VALUE = """
const [field, value] = arguments;
Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(field, value);
field.dispatchEvent(new Event("input", {bubbles: true}));
"""


#: Toast titles are recorded as they appear (a MutationObserver on the page), so a toast shown and
#: dismissed between two polls of a loaded machine's WebDriver is still seen.
RECORD_TOASTS = """
window.__hubflowToasts = [];
if (!window.__hubflowToastObserver) {
  const seen = () => {
    for (const element of document.querySelectorAll("[data-part='title'], [role='status']")) {
      const text = element.textContent;
      if (text && !window.__hubflowToasts.includes(text)) window.__hubflowToasts.push(text);
    }
  };
  window.__hubflowToastObserver = new MutationObserver(seen);
  window.__hubflowToastObserver.observe(document.body, {childList: true, subtree: true, characterData: true});
}
"""


class AirflowUI:
    """One logged-in browser on one Airflow API server (``base``: its URL)."""

    def __init__(self, driver: Any, base: str) -> None:
        self.driver = driver
        self.base = base.rstrip("/")

    # Plumbing ------------------------------------------------------------------------------------

    def _wait(self, condition: Any, what: str) -> Any:
        """``condition`` polled until it returns something; an element the UI re-rendered between
        finding and reading it (a toast replaced, a list refreshed) is looked for again at the next
        poll instead of failing the step."""
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            wait = WebDriverWait(
                self.driver,
                STEP_TIMEOUT,
                poll_frequency=0.25,
                ignored_exceptions=(StaleElementReferenceException,),
            )
            return wait.until(condition)
        except TimeoutException:
            raise AssertionError(f"the Airflow UI did not show {what} within {STEP_TIMEOUT:.0f}s") from None

    def find(self, xpath: str, what: str, within: Any = None, visible: bool = True) -> Any:
        """The first element at ``xpath`` (in ``within`` when given) that is shown (or, with
        ``visible=False``, that exists: a select's hidden value), waiting for it."""
        root = within or self.driver

        def found(_: Any) -> Any:
            for element in root.find_elements("xpath", xpath):
                if not visible or element.is_displayed():
                    return element
            return None

        return self._wait(found, what)

    def click(self, element: Any) -> None:
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        element.click()

    def _dialog(self) -> Any:
        return self.find("//*[@data-scope='dialog' and @data-part='content']", "the Trigger dialog")

    def _open_trigger_dialog(self, dag_id: str) -> Any:
        self.driver.get(f"{self.base}/dags/{dag_id}")
        self.click(self.find("//button[normalize-space()='Trigger']", f"{dag_id}'s Trigger button"))
        return self._dialog()

    def _record_toasts(self) -> None:
        """Record the toasts from now on (before the click that makes one): see :meth:`_toast`."""
        self.driver.execute_script(RECORD_TOASTS)

    def _toast(self, title: str) -> str:
        """The text of the toast titled ``title``, shown now or recorded since :meth:`_record_toasts`;
        a failure toast fails at once with its text."""

        def shown(driver: Any) -> Any:
            for text in driver.execute_script("return window.__hubflowToasts || []"):
                if title in text:
                    return text
                if "Failed" in text or "Error" in text:
                    raise AssertionError(f"the Airflow UI said: {text}")
            for element in driver.find_elements("xpath", "//*[@data-part='title' or @role='status']"):
                text = element.text
                if title in text:
                    return text
                if "Failed" in text or "Error" in text:
                    raise AssertionError(f"the Airflow UI said: {element.find_element('xpath', '..').text}")
            return None

        return self._wait(shown, f"the toast '{title}'")

    # What a person does --------------------------------------------------------------------------

    def log_in(self, user: str, password: str) -> None:
        """Sign in on the auth manager's login page (the simple auth manager's or FAB's, where the
        UI sends a visitor who is not logged in); returns once the UI's home is shown."""
        self.driver.get(f"{self.base}/")
        name = self.find("//input[@name='username' or @id='username']", "the login form")
        name.send_keys(user)
        self.find("//input[@type='password']", "the password field").send_keys(password)
        self.click(self.find("//button[@type='submit'] | //input[@type='submit']", "the login button"))
        self.find("//a[contains(@href, '/dags')] | //*[normalize-space()='Dags']", "the UI after login")

    def backfill(self, dag_id: str, start: datetime, end: datetime, reprocess: str = "Missing Runs") -> str:
        """Run a backfill of ``dag_id`` from its Trigger dialog over logical dates ``start``..``end``
        (UTC), with the dialog's ``reprocess`` choice; returns what the dialog said it would run
        ("2 runs will be triggered.")."""
        dialog = self._open_trigger_dialog(dag_id)
        self.click(self.find(".//label[.//*[normalize-space()='Backfill']]", "the Backfill choice", dialog))
        for index, moment in enumerate((start, end)):
            self._pick_datetime(dialog, index, moment)
        self.click(self.find(f".//label[.//*[normalize-space()='{reprocess}']]", reprocess, dialog))
        affected = self.find(
            ".//*[contains(text(), 'will be triggered')]", "the runs it would trigger", dialog
        )
        said = affected.text
        button = self.find(".//button[normalize-space()='Run Backfill']", "Run Backfill", dialog)
        self._wait(lambda _: button.is_enabled(), "Run Backfill enabled")
        self._record_toasts()
        self.click(button)
        self._toast("Backfill generated")
        return said

    def _pick_datetime(self, dialog: Any, index: int, moment: datetime) -> None:
        """Type a date and a time into the ``index``-th date-time picker (the dialog's From, To)."""
        from selenium.webdriver.common.keys import Keys

        pickers = dialog.find_elements("xpath", ".//*[@data-testid='datetime-input']")
        self.click(pickers[index])
        popover = self.find(
            "//*[@data-scope='popover' and @data-part='content' and @data-state='open']", "the date picker"
        )
        date, clock = popover.find_elements("xpath", ".//input")[:2]
        for field, text in ((date, moment.strftime("%Y/%m/%d")), (clock, moment.strftime("%H:%M"))):
            field.send_keys(Keys.CONTROL, "a")
            field.send_keys(text)
        clock.send_keys(Keys.ESCAPE)
        shown = moment.strftime("%b %d, %Y %H:%M")
        self._wait(lambda _: pickers[index].text == shown, f"the picker showing {shown}")

    def trigger(self, dag_id: str, params: dict[str, Any]) -> str:
        """Trigger one run of ``dag_id`` from its Params form: a choice (enum) typed into its select,
        a boolean set on its switch, text typed; returns the new run's id (from the page it opens)."""

        dialog = self._open_trigger_dialog(dag_id)
        for name, value in params.items():
            field = self.find(
                f".//input[@name='element_{name}']", f"the form's {name}", dialog, visible=False
            )
            if isinstance(value, bool):
                if field.is_selected() != value:
                    self.click(field.find_element("xpath", ".."))
                self._wait(lambda _, f=field, v=value: f.is_selected() == v, f"{name} set to {value}")
            elif field.get_attribute("type") == "hidden":  # a select: type the choice, take it
                box = field.find_element("xpath", "preceding::input[@type='text'][1]")
                box.send_keys(str(value))  # filters the menu ("start" also shows "restart")
                option = f"//*[@role='option' or contains(@id, '-option-')][normalize-space()='{value}']"
                self.click(self.find(option, f"the choice {value!r} of {name}"))
                self._wait(lambda _, f=field, v=value: f.get_attribute("value") == str(v), f"{name}={value}")
            else:
                # The whole text in one input event, as a paste gives it: typed key by key, a space
                # that is last when the form re-renders is trimmed away ("is back" became "isback").
                self.driver.execute_script(SET_INPUT_VALUE, field, str(value))
                self._wait(lambda _, f=field, v=value: f.get_attribute("value") == str(v), f"{name} typed")
        before = self.driver.current_url
        trigger = self.find(".//button[normalize-space()='Trigger']", "the form's Trigger", dialog)
        self._record_toasts()
        self.click(trigger)
        self._toast("Dag Run Triggered")
        self._wait(lambda driver: "/runs/" in driver.current_url and driver.current_url != before, "the run")
        return self.driver.current_url.rsplit("/runs/", 1)[1].split("/")[0]

    def request_status(self, method: str, path: str, body: Any = None) -> int:
        """The HTTP status Airflow answers to ``method path`` (``body`` as JSON) sent from the page
        with the logged-in session's cookie, as the UI's own calls are (the Trigger form posts
        ``/api/v2/dags/<dag id>/dagRuns``)."""
        script = """
        const [method, path, body, done] = arguments;
        fetch(path, {method, credentials: "same-origin", headers: {"Content-Type": "application/json"},
                     body: body === null ? undefined : JSON.stringify(body)})
          .then((answer) => done(answer.status), (error) => done(String(error)));
        """
        self.driver.set_script_timeout(STEP_TIMEOUT)
        status = self.driver.execute_async_script(script, method, f"{self.base}{path}", body)
        assert isinstance(status, int), f"{method} {path} from the page failed: {status}"
        return status

    def text(self, path: str, contains: str) -> str:
        """The visible text of the page at ``path`` once it contains ``contains``."""
        self.driver.get(f"{self.base}{path}")
        return self._wait(
            lambda driver: (
                (text := driver.find_element("tag name", "body").text) and contains in text and text
            ),
            f"'{contains}' on {path}",
        )


@contextmanager
def browser(base: str, artifacts: Path) -> Iterator[AirflowUI]:
    """A headless Chromium on ``base`` (skips the test, saying what to install, without it); on any
    failure inside, a screenshot and the HTML of the page go to ``artifacts``, named in the error."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed: make test-tools installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    profile = artifacts / "chromium-profile"
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(STEP_TIMEOUT)
    try:
        yield AirflowUI(driver, base)
    except BaseException as error:
        artifacts.mkdir(parents=True, exist_ok=True)
        shot, page = artifacts / "failure.png", artifacts / "failure.html"
        try:
            driver.save_screenshot(str(shot))
            page.write_text(driver.page_source, encoding="utf-8")
        except Exception:  # the browser may be what failed; keep the first error
            pass
        error.add_note(f"screenshot {shot}, page {page}")
        raise
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
