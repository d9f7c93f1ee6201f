val labels = org.json.JSONArray(context.assets.open("{name}").bufferedReader().readText())
    .let {{ a -> List(a.length()) {{ a.getString(it) }} }}  // labels[i] names class i
