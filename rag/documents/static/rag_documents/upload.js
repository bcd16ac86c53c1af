// Folder uploads keep their relative paths: the browser sends only file names in the multipart body, so the
// paths (webkitRelativePath, "" for files picked one by one) go in a hidden field, in the order of the files.
"use strict";
(function () {
  const form = document.querySelector("form[enctype='multipart/form-data']");
  if (!form) return;
  const hidden = form.querySelector("input[name='relative_paths']");
  if (!hidden) return;
  form.addEventListener("submit", function () {
    const paths = [];
    for (const name of ["files", "folder"]) {
      const input = form.querySelector("input[type='file'][name='" + name + "']");
      if (!input || !input.files) continue;
      for (const file of input.files) paths.push(file.webkitRelativePath || "");
    }
    hidden.value = JSON.stringify(paths);
  });
})();
