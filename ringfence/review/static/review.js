// ringfence review: live updates and armed confirm buttons. No markup is ever written from
// a string here (the page's Content-Security-Policy requires Trusted Types and allows none):
// elements are created and filled with textContent only.
"use strict";

(function () {
  const body = document.body;

  // A confirm button works only after it has been on screen for a moment (data-arm, in ms):
  // a double click, or a click meant for the button that was there before, does nothing.
  for (const button of document.querySelectorAll("button[data-arm]")) {
    const delay = Number(button.dataset.arm) || 0;
    button.disabled = true;
    setTimeout(() => { button.disabled = false; }, delay);
  }

  if (body.dataset.live !== "1" || !body.dataset.stream || !window.EventSource) {
    return;
  }
  const shown = body.dataset.version;
  let pending = false;

  function busy() {
    const active = document.activeElement;
    if (active && ["INPUT", "SELECT", "TEXTAREA"].includes(active.tagName)) {
      return true;
    }
    for (const input of document.querySelectorAll("input.pattern")) {
      if (input.value) {
        return true;
      }
    }
    // A box the person ticked (an Undo's "force") is not cleared under them by a reload.
    if (document.querySelector("input[type=checkbox]:checked")) {
      return true;
    }
    const selection = window.getSelection();
    return selection !== null && selection.toString() !== "";
  }

  function offerReload() {
    const banner = document.getElementById("banner");
    if (!banner || !banner.hidden) {
      return;
    }
    banner.replaceChildren();
    const text = document.createElement("span");
    text.textContent = "New activity. ";
    const button = document.createElement("button");
    button.type = "button";
    button.id = "reload";
    button.textContent = "Show it";
    button.addEventListener("click", () => window.location.reload());
    banner.append(text, button);
    banner.hidden = false;
  }

  // A page that holds (questions waiting) never reloads itself: one answered or timed out
  // would move the next one up under the pointer, and a click meant for the question read
  // would land on another. It offers the new state instead.
  function refresh() {
    pending = false;
    if (body.dataset.hold === "1" || busy()) {
      offerReload();
    } else {
      window.location.reload();
    }
  }

  const source = new EventSource(body.dataset.stream);
  source.addEventListener("message", (event) => {
    if (event.data === shown || pending) {
      return;
    }
    pending = true;
    setTimeout(refresh, 300);
  });
})();
