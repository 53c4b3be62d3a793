// Copy buttons on included example files copy the file exactly as CI tested it.
// sphinx-copybutton drops the last newline of every block (so that a pasted command does not
// run at once); for a whole file that would change the file, so these blocks are copied here.
document.addEventListener("click", async (event) => {
  const button = event.target.closest(".example-file button.copybtn");
  if (!button) return;
  event.stopImmediatePropagation();
  event.preventDefault();
  const target = document.querySelector(button.getAttribute("data-clipboard-target"));
  if (!target) return;
  try {
    await navigator.clipboard.writeText(target.textContent);
    button.setAttribute("data-tooltip", "Copied!");
    button.classList.add("success");
  } catch (err) {
    button.setAttribute("data-tooltip", "Copy failed: select the text instead");
  }
  setTimeout(() => {
    button.setAttribute("data-tooltip", "Copy");
    button.classList.remove("success");
  }, 2000);
}, true);
