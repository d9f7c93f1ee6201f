const labels = await (await fetch("{name}")).json();  // labels[i] names class i
